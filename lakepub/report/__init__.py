"""``lakepub report``: a self-contained HTML page (``html.py``) with inline SVG charts (``svg.py``)."""
