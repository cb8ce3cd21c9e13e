// placeholder: filled in by the attention kernel family
