"""What a reduce's refresh reads instead of its touched keys' history: a summary of the
old updates of insertions (``insertions.py``), the totals of an invertible reduce
(``abelian.py``), and the per-key totals large layers keep beside them (``layer_totals.py``)."""
