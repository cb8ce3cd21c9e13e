// placeholder: filled in by the encoder kernel family
