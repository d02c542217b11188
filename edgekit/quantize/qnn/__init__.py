"""The ``qnn`` profile (Qualcomm's HTP): full-integer QDQ by the QNN rules (``graph``), each
tensor's output noise alone at 8 bit (``sensitivity``), the promotion search that puts the
fewest tensors at 16 bit for the budget on the HTP backend (``search``), and the hooks that run
them in the pipeline (``profile.QnnProfile``)."""
