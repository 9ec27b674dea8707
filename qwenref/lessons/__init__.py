"""What the notebooks import beyond the library: one module per notebook (named after its stage)
holding the drawing code, the worked examples' builders, the sliders and the exercises'
checkers, so a notebook's cells stay short. Nothing here is part of the decode path."""
