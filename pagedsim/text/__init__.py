"""Words shared by every command: the language rule (`lang.py`) and the captions in every
language (`captions.py`; English lives with the core, in `pagedsim/captions_en.py`)."""
