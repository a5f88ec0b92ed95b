"""Files on local disk and object stores: the files sink, its formats, and the files source."""
