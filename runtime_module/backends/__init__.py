"""provmap's built-in backends, one file each (see provmap.runtime_module.backend for the interface)."""
