"""What every aggregate shows: each compressed answer paired with its FullCache control, per cell (the
matrix, failure sets and categories), across cells (matched failure sets, separation), what it cost
and how judges agree with the task's scorer."""
