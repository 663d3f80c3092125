"""Teaching, written from real runs' events: the prose that explains a pass (`explain`) and the guided lesson
(`lesson`). No Qt: the inspector, the lesson panel and the command line show it."""
