"""Making a bundle offline: import from a Hugging Face checkpoint (importer/), optimise it (optimize.py) behind the
accuracy gate (accuracy.py), choose its reference answers (reference_choice.py), write it atomically (output.py).
The `registry` command runs these; the server never imports them."""
