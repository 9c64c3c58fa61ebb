"""Distinct strings per length, over partially ordered times ``(version, round)``.

Input trace ``strings`` (column ``s``, d = 2) -> output ``length_counts`` (``length``,
``distinct``): for each length, how many distinct strings of that length are present.
Changes at ``(0,1)`` and ``(1,0)`` can change the output at ``(1,1)``: the output trace
holds updates there even though no input update has that time.
"""


def pipeline(p):
    strings = p.input("strings")
    by_length = strings.select("s", length="length(s)")
    p.output("length_counts", by_length.count_distinct(by="length", name="distinct"))
