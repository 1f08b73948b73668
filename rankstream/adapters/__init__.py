"""Framework adapters: lifecycle only, no metric math."""
