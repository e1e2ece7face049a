"""What every app shares: web and API plumbing. Imports only tenants, never a feature."""
