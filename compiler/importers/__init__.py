"""Other tools' projects and names brought to rivc: rivc migrate, config aliases."""
