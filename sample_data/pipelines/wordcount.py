"""Word count: how many times each word occurs, at every time.

Input trace ``words`` (column ``word``) -> output trace ``counts`` (``word``, ``count``).
"""


def pipeline(p):
    words = p.input("words")
    p.output("counts", words.count(by="word"))
