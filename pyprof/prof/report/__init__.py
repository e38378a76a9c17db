"""What prof writes for other programs to show: the timeline for Perfetto (trace.py) and the
self-contained HTML report (html.py, data.py). The views that use them are views/trace.py and
views/html.py."""
