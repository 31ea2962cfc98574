"""VIZ=1: record what the compiler did (tensor graphs, schedules, every named pass of every kernel, the linear
program, the source, with PROFILE=1 the device timeline) and show it in a browser.

- hook.py: the settings and the flags the core tests (cheap when VIZ is unset; imports nothing heavy)
- record.py: the recording itself and its JSON form
- server.py: the HTTP server of the page and the recording (`tiny viz FILE`)
- assets/: the page (index.html, app.js, style.css, a vendored dagre for the layout)
"""
