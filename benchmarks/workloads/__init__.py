"""Load generators shared by the scenarios (raftlog and its peers run the same code)."""
