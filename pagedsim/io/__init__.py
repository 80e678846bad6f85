"""What every command reads and writes: argument types and the one-line usage errors
(`args.py`), and a trace as JSON and back (`trace_json.py`)."""
