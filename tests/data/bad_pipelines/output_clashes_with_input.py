def pipeline(p):
    words = p.input("words")
    p.output("words", words.negate())
