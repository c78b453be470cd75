"""The read side shared by the store-reading commands and the operator dashboard (``/ui``).

``_names`` finds the session a user named, ``_reads`` reads what the commands print and the
pages show, ``_html`` and ``_pages`` render it, ``_app`` serves it and decides who may open it,
``_front`` puts it on a gateway's HTTP front. The dashboard only reads: no page changes a store.
Nothing is imported here, so a command that needs only ``_names`` loads no web framework.
"""
