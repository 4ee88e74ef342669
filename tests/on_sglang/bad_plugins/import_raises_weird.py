class Weird(Exception):
    def __str__(self):
        raise ValueError("bad str")


raise Weird()
