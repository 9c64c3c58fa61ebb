"""A valid pipeline: the cases that use it go wrong in their arguments."""


def pipeline(p):
    p.output("valid_out", p.input("words").count(by="word"))
