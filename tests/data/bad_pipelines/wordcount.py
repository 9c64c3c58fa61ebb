"""Not the wordcount that ran: a pipeline keeps its name only while its file is the same."""


def pipeline(p):
    p.output("counts", p.input("words").count(by="word").filter("count > 1"))
