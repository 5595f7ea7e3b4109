"""Small runnable MCPlet servers that show how the kit is used."""
