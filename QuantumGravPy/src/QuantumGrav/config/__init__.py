"""The config, the package's ground floor (it imports nothing of QuantumGrav but ``errors``): its typed sections
(``sections`` and the ``*_section(s)`` modules), loading and validation (``schema``, ``validation``), the YAML text
(``yaml_io``), the checks of single values (``checks``), the roles of its ``!pyobject`` keys (``roles``), the
smoke-test caps (``smoke_test``) and the generated reference (``reference``)."""
