"""What the operators share that is not an operator: their OpenLineage facets."""
