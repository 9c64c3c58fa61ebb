"""Update files: read, typed and checked before anything is written."""
