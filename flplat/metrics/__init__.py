"""Non-IID quantifiers and evaluation metrics (pure functions)."""
