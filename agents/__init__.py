"""The agent team: planner, coder and verifier, and the loop that runs them."""
