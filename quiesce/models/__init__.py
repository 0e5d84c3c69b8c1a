"""quiesce.models"""
