"""The config, the package's ground floor (it imports nothing of QuantumGrav but ``common.errors``): its typed
sections (``sections/``, gathered by ``layout``), loading and validation (``schema``, ``validation``), the YAML text
(``yaml_io``), the checks of single values (``checks``), the roles of its ``!pyobject`` keys (``roles``), the
smoke-test caps (``smoke_test``) and the generated reference (``reference``)."""
