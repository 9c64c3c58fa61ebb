"""Fails on the data, inside Spark: 1 / (length - 5) for a five-letter word."""


def pipeline(p):
    p.output("o", p.input("words").select("word", x="1 / (length(word) - 5)"))
