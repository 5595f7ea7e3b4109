"""The tool index (MGP §16.4): every MCPlet's searchable terms, kept in the database, and the
keyword (BM25) and category searches behind the model's discovery meta-tools."""
