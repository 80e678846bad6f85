"""Chapter 3's lessons, one module per section: `pagedsim lesson 3.1` ... `pagedsim lesson 3.7`.

Each module has TITLE, TEXT (English, then Chinese) and demo(out_dir), which runs
the section's demonstration on the simulator, the kernels or the pictures.
"""
