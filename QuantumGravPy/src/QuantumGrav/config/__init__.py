"""The config: its schema, loading and overrides (``schema``), the roles its ``!pyobject`` keys take
(``roles``), the smoke-test caps (``smoke_test``) and the generated reference (``reference``)."""
