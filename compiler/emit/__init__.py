"""What compile writes: the typed manifest (the hand-off to the runtime) and target/."""
