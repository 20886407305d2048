"""The RL training loop and its parts: `lmpo train`."""
