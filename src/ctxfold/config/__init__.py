"""Configuration: schema, load pipeline, legacy migration."""
