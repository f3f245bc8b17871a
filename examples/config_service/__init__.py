"""A small conditions-uploader service and two code updates to it.

``uploader.py`` is the service; ``updates/*.diff`` are two real changes to it
(a bottleneck added to a constructor, and a ``range(len(x))`` to
``enumerate(x)`` refactor); ``versions.load(name)`` builds any version as its
own module so old and new code can run side by side in one process;
``payloads.generate`` makes the growing set of test inputs.
"""
