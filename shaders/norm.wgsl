// placeholder: filled in by the norm kernel family
