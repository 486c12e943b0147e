"""provmap's built-in backends, one file each (see runtime_module.backend for the interface)."""
