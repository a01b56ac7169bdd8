"""``python -m flplat``: the ``flplat`` command (the same as ``python -m flplat.cli``)."""

from flplat.cli import entry

if __name__ == "__main__":  # not when multiprocessing's spawn re-imports the main module (as __mp_main__)
    entry()
