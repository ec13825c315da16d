"""The syllable alphabet the synthetic corpus's words are made of; the needle tasks' key names use it
too, so a vocabulary that writes the corpus writes every name."""

CONSONANTS = "bdfghklmnprstvz"
VOWELS = "aeiou"
