"""What every app shares: web and API plumbing. Not a Django app; imports no feature."""
