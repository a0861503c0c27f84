"""Configuration, the memory formula, RSS and the byte counters; imports
nothing of jask."""
