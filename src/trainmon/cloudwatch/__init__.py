"""CloudWatch's metric model, statistics and API over trainmon's store."""
