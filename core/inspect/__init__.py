"""What a model looks at: animal masks, image variants, inpainting, shortcut diagnostics, selective
sensitivity, flank suggestions and the 2-D map of an embedding space."""
