"""Ground-floor utilities every floor uses and that know nothing of provenance: errors and
warnings, atomic writes, dtype tables, interrupt handling.  They sit on the lowest floor only so
that every floor may import them."""
