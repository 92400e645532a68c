"""One module per scenario; each turns the settings into groups of rows to time."""
