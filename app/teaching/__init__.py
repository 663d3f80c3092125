"""Teaching: the prose that explains a pass to a reader (`explain`), rebuilt from its event alone. No Qt: the
inspector and the command line show it."""
