"""Development helpers: building real components and running a local federation of partitions."""
