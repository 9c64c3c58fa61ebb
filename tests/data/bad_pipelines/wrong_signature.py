def pipeline():
    pass
