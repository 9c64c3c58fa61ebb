def pipeline(p):
    words = p.input("words")
    p.output("o", words)
    p.output("o", words.negate())
