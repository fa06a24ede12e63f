"""`vkinfer bench`: latency, agreement and conditions of vkinfer and its peers on the user's models, as JSON
lines (records.py has the schema), and the A/B comparison of two result files (compare.py)."""
