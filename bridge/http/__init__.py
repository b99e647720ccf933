"""The HTTP door (``bridge serve``): the ``/v1`` JSON envelope API and the Service Bus REST send protocol."""
