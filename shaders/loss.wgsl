// placeholder: filled in by the loss kernel family
